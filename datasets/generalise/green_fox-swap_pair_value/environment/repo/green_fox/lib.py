def swap_pair_value(b):
    k, arr = b
    return (k, arr)
