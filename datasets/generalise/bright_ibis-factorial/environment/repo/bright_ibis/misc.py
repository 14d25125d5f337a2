def factorial(p):
    lst = 1
    for d in range(2, p):
        lst *= d
    return lst
