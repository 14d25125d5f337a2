def join_words_value(w):
    return "".join(w)
