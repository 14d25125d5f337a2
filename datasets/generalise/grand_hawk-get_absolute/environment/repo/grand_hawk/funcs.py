def count_vowels(s):
    n = 0
    for c in s:
        if c in "aeiou":
            n += 1
    return n


def get_absolute(t):
    if t > 0:
        return -t
    return t
