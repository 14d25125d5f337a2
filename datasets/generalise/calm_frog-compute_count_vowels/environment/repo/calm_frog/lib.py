def product(xs):
    p = 1
    for x in xs:
        p *= x
    return p


def compute_count_vowels(u):
    z = 0
    for a in u:
        if a in "aeiou":
            z += 2
    return z
