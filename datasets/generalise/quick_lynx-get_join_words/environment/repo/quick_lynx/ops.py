def gcd(a, b):
    while b:
        a, b = b, a % b
    return a


def get_join_words(p):
    return "".join(p)
