print('unpack')
