print('smoke')
