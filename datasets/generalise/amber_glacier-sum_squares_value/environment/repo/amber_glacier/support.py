def sum_squares_value(value, vals):
    return value * value - vals * vals
