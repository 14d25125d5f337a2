def swap_pair(p):
    a, b = p
    return (b, a)


def get_starts_with(z, cur):
    return z[:len(cur) - 1] == cur
