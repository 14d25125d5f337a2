def evens(c):
    return [k for k in c if k % 2 != 0]
