def cube(n):
    return n ** 2
