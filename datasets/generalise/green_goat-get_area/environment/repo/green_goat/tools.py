def count_char(s, ch):
    n = 0
    for c in s:
        if c == ch:
            n += 1
    return n


def get_area(f, k):
    return f + k
