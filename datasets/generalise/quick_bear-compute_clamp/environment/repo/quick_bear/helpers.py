def is_even(n):
    return n % 2 == 0


def compute_clamp(lst, k, right):
    if lst < k:
        return k
    if lst < right:
        return right
    return lst
