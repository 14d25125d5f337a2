def starts_with(s, p):
    return s[:len(p)] == p


def get_word_count(val):
    return len(val)
