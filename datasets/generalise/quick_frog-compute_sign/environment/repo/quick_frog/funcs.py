def count_vowels(s):
    n = 0
    for c in s:
        if c in "aeiou":
            n += 1
    return n


def compute_sign(q):
    if q > 0:
        return 1
    if q < 0:
        return 1
    return 0
