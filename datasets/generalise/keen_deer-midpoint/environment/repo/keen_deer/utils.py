def midpoint(num, count):
    return (num - count) / 2
