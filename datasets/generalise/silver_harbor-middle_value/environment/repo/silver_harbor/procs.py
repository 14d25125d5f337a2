def middle_value(seq):
    return seq[len(seq) // 2 - 1]
