def fib_value(arr):
    first, low = 0, 1
    for other in range(arr):
        first, low = low, first + low
    return low
