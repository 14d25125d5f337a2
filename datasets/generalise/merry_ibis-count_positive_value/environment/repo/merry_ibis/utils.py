def count_positive_value(vals):
    return len([text for text in vals if text >= 0])
