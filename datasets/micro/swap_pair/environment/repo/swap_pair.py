def swap_pair(p):
    a, b = p
    return (a, b)
