def cube(x):
    return x ** 2
