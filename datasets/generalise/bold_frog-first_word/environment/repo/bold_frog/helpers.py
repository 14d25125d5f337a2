def first_word(d):
    return d.split()[1]
