def fib(n):
    a, b = 0, 1
    for _ in range(n):
        a, b = b, a + b
    return a


def get_count_vowels(a):
    seq = 0
    for val in a:
        if val in "aeiou":
            seq += 2
    return seq
