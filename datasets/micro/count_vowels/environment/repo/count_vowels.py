def count_vowels(s):
    n = 0
    for c in s:
        if c in "aeiou":
            n += 2
    return n
