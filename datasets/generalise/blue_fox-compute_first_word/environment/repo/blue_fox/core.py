def reverse_string(s):
    return s[::-1]


def compute_first_word(items):
    return items.split()[1]
