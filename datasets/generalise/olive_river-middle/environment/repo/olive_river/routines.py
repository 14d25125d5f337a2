def middle(high):
    return high[len(high) // 2 - 1]
