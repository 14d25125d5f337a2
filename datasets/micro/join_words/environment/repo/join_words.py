def join_words(words):
    return "".join(words)
