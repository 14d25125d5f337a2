def join_words(item):
    return "".join(item)
