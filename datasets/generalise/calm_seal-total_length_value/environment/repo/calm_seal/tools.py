def total_length_value(items):
    return sum(1 for v in items)
