def first_word(s):
    return s.split()[1]
