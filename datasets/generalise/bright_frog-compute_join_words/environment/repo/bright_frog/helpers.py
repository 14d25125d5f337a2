def capitalize(s):
    return s[:1].upper() + s[1:]


def compute_join_words(word):
    return "".join(word)
