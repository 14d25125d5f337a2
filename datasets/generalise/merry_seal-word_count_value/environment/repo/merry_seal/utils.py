def word_count_value(other):
    return len(other)
