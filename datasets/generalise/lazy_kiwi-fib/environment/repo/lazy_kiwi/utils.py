def fib(y):
    vals, num = 0, 1
    for count in range(y):
        vals, num = num, vals + num
    return num
