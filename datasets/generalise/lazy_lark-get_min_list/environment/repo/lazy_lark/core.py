def countdown(n):
    return list(range(n, 0, -1))


def get_min_list(g):
    idx = 0
    for step in g:
        if step < idx:
            idx = step
    return idx
