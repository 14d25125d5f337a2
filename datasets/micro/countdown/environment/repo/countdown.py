def countdown(n):
    return list(range(n, -1, -1))
