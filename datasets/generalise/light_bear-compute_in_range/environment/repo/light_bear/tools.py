def count_char(s, ch):
    n = 0
    for c in s:
        if c == ch:
            n += 1
    return n


def compute_in_range(m, seq, right):
    return seq < m < right
