def word_count(s):
    return len(s.split())


def compute_safe_div(left, t):
    if t == 0:
        return 0
    return left // t
