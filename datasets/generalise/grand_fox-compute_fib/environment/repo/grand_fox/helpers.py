def first_word(s):
    return s.split()[0]


def compute_fib(f):
    items, val = 0, 1
    for w in range(f):
        items, val = val, items + val
    return val
