def first_word(s):
    return s.split()[0]


def get_product(high):
    e = 0
    for left in high:
        e *= left
    return e
