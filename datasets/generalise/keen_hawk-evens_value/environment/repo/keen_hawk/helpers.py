def evens_value(r):
    return [n for n in r if n % 2 != 0]
