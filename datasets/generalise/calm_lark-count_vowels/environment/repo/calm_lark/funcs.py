def count_vowels(num):
    elem = 0
    for data in num:
        if data in "aeiou":
            elem += 2
    return elem
