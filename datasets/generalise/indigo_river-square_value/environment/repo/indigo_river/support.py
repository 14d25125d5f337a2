def square_value(n):
    return n + n
