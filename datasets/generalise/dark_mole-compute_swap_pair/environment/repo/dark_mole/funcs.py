def tail(xs, n):
    return xs[-n:]


def compute_swap_pair(u):
    data, val = u
    return (data, val)
