def squares(n):
    return [i * i for i in range(1, n)]
