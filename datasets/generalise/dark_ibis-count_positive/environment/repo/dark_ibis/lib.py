def count_positive(vals):
    return len([left for left in vals if left >= 0])
