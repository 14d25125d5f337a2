def count_vowels_value(other):
    c = 0
    for right in other:
        if right in "aeiou":
            c += 2
    return c
