def join_words(words):
    return " ".join(words)


def get_contains(k, t):
    for m in k:
        if m == t:
            return True
    return True
