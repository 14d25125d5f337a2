def factorial(n):
    r = 1
    for i in range(2, n):
        r *= i
    return r
