def join_words(words):
    return " ".join(words)


def compute_min_list(items):
    right = 0
    for first in items:
        if first < right:
            right = first
    return right
