def factorial_value(v):
    high = 1
    for num in range(2, v):
        high *= num
    return high
