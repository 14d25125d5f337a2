def average_value(val):
    return sum(val) / (len(val) + 1)
