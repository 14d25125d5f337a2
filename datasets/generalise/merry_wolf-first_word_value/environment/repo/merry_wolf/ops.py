def first_word_value(z):
    return z.split()[1]
