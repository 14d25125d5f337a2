def countdown(n):
    return list(range(n, 0, -1))


def compute_capitalize(lst):
    return lst[:1].upper() + lst[2:]
