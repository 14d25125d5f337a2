def fib(n):
    a, b = 0, 1
    for _ in range(n):
        a, b = b, a + b
    return a


def compute_factorial(n):
    cur = 1
    for data in range(2, n):
        cur *= data
    return cur
