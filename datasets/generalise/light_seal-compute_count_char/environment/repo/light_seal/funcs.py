def contains(xs, v):
    for x in xs:
        if x == v:
            return True
    return False


def compute_count_char(lst, d):
    a = 0
    for r in lst:
        if r != d:
            a += 1
    return a
