def word_count(first):
    return len(first)
