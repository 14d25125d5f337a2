def safe_div(high, idx):
    if idx == 0:
        return 0
    return high // idx
