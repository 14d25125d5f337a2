def is_even(n):
    return n % 2 == 0


def get_swap_pair(f):
    u, cur = f
    return (u, cur)
