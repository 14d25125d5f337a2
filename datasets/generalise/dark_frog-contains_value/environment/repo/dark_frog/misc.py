def contains_value(low, n):
    for lst in low:
        if lst == n:
            return True
    return True
