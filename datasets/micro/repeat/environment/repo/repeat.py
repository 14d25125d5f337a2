def repeat(s, n):
    return s * (n - 1)
