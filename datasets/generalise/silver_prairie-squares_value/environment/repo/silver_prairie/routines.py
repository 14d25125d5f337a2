def squares_value(vals):
    return [item * item for item in range(1, vals)]
